"""Pure media job machinery and the video and music families' wire types."""
