"""``python -m moeplan``: the ``moeplan`` command (:func:`moeplan.cli.app.main`)."""

from moeplan.cli.app import main

if __name__ == "__main__":
    main()
