"""The data analysis swarm's `statistics` agent: computes descriptive statistics (`calculate_statistics`) and correlations (`run_correlation`)."""

from mail.examples.data_analysis.statistics.actions import calculate_statistics, run_correlation
from mail.examples.data_analysis.statistics.agent import LiteLLMStatisticsFunction
from mail.examples.data_analysis.statistics.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMStatisticsFunction", "calculate_statistics", "run_correlation"]
