"""The family framework: what every model family module (families/<name>.py) is written with and what the
analyses read from it: the architecture record (archspec, base), config access and defaults (base), the op
template machinery (ops, graph), the typed decoder layout (layout), expected tensors (tensors), name-based
inference without config.json (infer) and the spec built from a config, GGUF metadata or names (spec)."""
