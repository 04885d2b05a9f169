"""The version of cachekit and the name it is published under, each kept in one place."""

#: The installed version of cachekit.
__version__ = "0.1.0"

#: The distribution's name on the package index (``pip install cachekit-llm``); the import package and
#: the command stay ``cachekit``. ``cachekit`` there is an unrelated project that imports as
#: ``cachekit`` too, so every install line cachekit prints names this one.
DISTRIBUTION = "cachekit-llm"
