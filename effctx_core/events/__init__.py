"""Engine events: the typed records, their JSON Lines trace, reading, export, replay, the timeline and the requests."""
