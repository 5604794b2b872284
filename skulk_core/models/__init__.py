"""Model cards, the catalog, GGUF headers and memory arithmetic."""
