"""Pure audio facts: speech formats and their media types, bounds, WAV/PCM framing,
and subtitle rendering. No codecs and no I/O live here."""
