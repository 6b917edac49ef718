"""What several backends share that is not llama.cpp's: the residency policy check, the
executor of a backend that cannot edit its cache, and loopback and port helpers."""
