"""One module per group of commands; each exports COMMANDS, registered by catalog_app.cli."""
