"""Controllers: the contract each follows, the runner that asks them, one package apiece."""
