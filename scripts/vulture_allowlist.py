# Names vulture reports as unused that are used by frameworks: Haystack calls run(tools=...) on a chat
# generator with keyword arguments it does not read.
tools  # noqa
kwargs  # noqa
