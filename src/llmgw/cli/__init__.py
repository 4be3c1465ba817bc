"""The `llmgw` command line."""

from llmgw.cli.help_types import flags_show_no_type

flags_show_no_type()
