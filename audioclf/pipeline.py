"""Kept for code that imports `input_fn`, `fill_cache` or `cached_clips` from here: see audioclf/data/."""

from audioclf.data.pipeline import cached_clips, fill_cache, input_fn  # noqa: F401
