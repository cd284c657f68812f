"""Quality measurement: metrics with their conventions, the independent judge, ``voicespec evaluate``."""
