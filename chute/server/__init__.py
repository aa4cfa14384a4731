"""asyncio listeners that feed the codecs and drive the core."""
