"""The data analysis swarm's `processor` agent: makes sample datasets (`generate_sample_data`) and reads CSV (`parse_csv`)."""

from mail.examples.data_analysis.processor.actions import generate_sample_data, parse_csv
from mail.examples.data_analysis.processor.agent import LiteLLMProcessorFunction
from mail.examples.data_analysis.processor.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMProcessorFunction", "generate_sample_data", "parse_csv"]
