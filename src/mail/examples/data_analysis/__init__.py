"""The `data-analysis` example swarm: a small data team.

`analyst` (the entrypoint) asks `processor` for data (generated samples, parsed CSV),
`statistics` for figures (descriptive statistics, correlation) and `reporter` for a Markdown
report. Everything is computed locally; the sample data is generated from a fixed seed.
"""

from mail.examples.data_analysis.analyst import LiteLLMAnalystFunction
from mail.examples.data_analysis.processor import (
    LiteLLMProcessorFunction,
    generate_sample_data,
    parse_csv,
)
from mail.examples.data_analysis.reporter import LiteLLMReporterFunction, format_report
from mail.examples.data_analysis.statistics import (
    LiteLLMStatisticsFunction,
    calculate_statistics,
    run_correlation,
)

__all__ = [
    "LiteLLMAnalystFunction",
    "LiteLLMProcessorFunction",
    "LiteLLMReporterFunction",
    "LiteLLMStatisticsFunction",
    "calculate_statistics",
    "format_report",
    "generate_sample_data",
    "parse_csv",
    "run_correlation",
]
