"""``python -m tts.cli``: the same as the ``tts`` command."""

from tts.cli.app import main

if __name__ == "__main__":
    main()
