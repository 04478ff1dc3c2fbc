"""Streaming keyword spotting: a trained speech_embedding model run on 80 ms hops of a live stream."""
