"""Results on disk, and reading them back."""
