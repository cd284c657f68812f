"""The decoding engine: layouts, warpers, exact acceptance, the speculative loop, drafters.

Engine code sees token steps only; it never touches audio or text."""
