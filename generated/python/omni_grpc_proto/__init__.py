"""Code generated from proto/omni/v1 by scripts/generate. DO NOT EDIT."""
