"""Text generation as the API sees it: wire types, prompt rendering, admission, streaming."""
