"""Embeddings as a service: OpenAI's wire types and the admission-to-runner path."""
