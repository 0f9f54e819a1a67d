"""The data analysis swarm's `reporter` agent: turns findings into a Markdown report with `format_report`."""

from mail.examples.data_analysis.reporter.actions import format_report
from mail.examples.data_analysis.reporter.agent import LiteLLMReporterFunction
from mail.examples.data_analysis.reporter.prompts import SYSPROMPT

__all__ = ["SYSPROMPT", "LiteLLMReporterFunction", "format_report"]
