"""`python -m catalog ...`, the same as the `catalog` command. An entry script, never imported by the library,
so it may start the application layer on top."""

from catalog_app.main import main

main()
