"""``summary.json`` and its typed mirror, with the plain-language hints drawn from it."""
