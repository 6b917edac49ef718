"""Engine events: the typed records, their JSON Lines trace, reading, export, replay and the timeline."""
