"""The broker's HTTP admin surface: the JSON API, metrics and health, the web console."""
