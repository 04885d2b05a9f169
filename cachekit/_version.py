"""The version of cachekit, kept in one place."""

#: The installed version of cachekit.
__version__ = "0.1.0"
