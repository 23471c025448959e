"""The pipeline on sound files, in-process: offline analysis and evaluation."""
