"""The version of cachekit and the name it is published under, each kept in one place."""

#: The installed version of cachekit.
__version__ = "0.1.0"

#: The distribution's name (not on the package index yet: installed from a checkout or a built wheel,
#: docs/release.md); the import package and the command stay ``cachekit``. ``cachekit`` on the package
#: index is an unrelated project that imports as ``cachekit`` too, so every install line cachekit
#: prints names this one (``pip install 'cachekit-llm[extra]'`` adds an extra to the installed one).
DISTRIBUTION = "cachekit-llm"
