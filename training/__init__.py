"""Training the dog-vocalization classifier: corpus, training set, network, fitting, validation."""
