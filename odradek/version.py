"""The version of the odradek package (``odradek.__version__``), in a module of its own so that the modules
the package's ``__init__`` imports can read it without importing the package."""

__version__ = "0.1.0"
