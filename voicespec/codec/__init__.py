"""The audio codec and its streaming decoders: verified frames in, PCM out, chunk by chunk."""
