"""What the docs site makes from the code at build time: the reference pages and the plots."""
