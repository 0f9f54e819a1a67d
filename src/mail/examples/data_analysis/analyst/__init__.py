"""The data analysis swarm's `analyst` agent: plans an analysis, asks the specialists and writes the conclusion."""

from mail.examples.data_analysis.analyst.agent import LiteLLMAnalystFunction
from mail.examples.data_analysis.analyst.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMAnalystFunction"]
