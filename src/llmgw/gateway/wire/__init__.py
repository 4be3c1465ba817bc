"""The dialects the data plane speaks: one module per dialect, and the translations between them."""
