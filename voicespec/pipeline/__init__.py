"""A voice (one folder with everything needed) and the text → PCM iterator every sink consumes."""
