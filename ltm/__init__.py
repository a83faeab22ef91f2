"""The entry points: the `ltm` command's parsing (`ltm.arguments`), its `main` (`ltm.main`),
and the composition root that builds each process from the settings (`ltm.composition`).
Run it as `ltm …` once installed, or as `python -m ltm …` from a checkout."""

__all__: list[str] = []
