"""The ordinance: the two rules over events, coverage, evidence windows and their digests."""
