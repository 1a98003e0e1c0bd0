"""Layer 5, analyses: each takes an open Checkpoint (and the census's facts about it) and returns a
plain, JSON-serialisable report dict whose "schema" key names its version. No printing."""
