"""Image generation and editing: admission, dispatch, encoding, the stored-image cache."""
