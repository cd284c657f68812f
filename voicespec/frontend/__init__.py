"""Front end: text in, model units out — sanitize, normalize, split, phonemize, durations."""
