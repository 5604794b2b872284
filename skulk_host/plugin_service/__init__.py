"""The plugin manager's own staged runtime: ``staging.py`` stages and activates a
generation, ``runtime.py`` owns its layout, seal and selection, ``bootstrap.py`` is the
standard-library entry that walks the seal before anything is imported, and
``generations.py`` removes unused generations."""
