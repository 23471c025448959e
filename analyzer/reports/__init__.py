"""The officer's evidence report: one self-contained HTML file and a PDF of the same content."""
