"""`python -m llmgw.cli` runs the `llmgw` command."""

from llmgw.cli.main import main

main()
