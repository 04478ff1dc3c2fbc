"""`audioclf.pipeline.input_fn`, `fill_cache` and `cached_clips`, kept for code that imports them from here: see audioclf/data/."""

from audioclf.data.pipeline import cached_clips, fill_cache, input_fn  # noqa: F401
