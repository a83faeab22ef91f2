"""The entry point: the `ltm` command line, one module per command group (`ltm.commands`),
its `main` (`ltm.main`), and the composition root that builds the worker from the settings
(`ltm.composition`). Run it as `ltm …` once installed, or as `python -m ltm …` from a
checkout."""

__all__: list[str] = []
