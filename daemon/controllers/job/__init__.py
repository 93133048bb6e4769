"""The Job controller: upstream Job semantics (pods, back-off, suspension, policies)."""
