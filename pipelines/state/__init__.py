"""Reading what a state folder holds besides the index: snapshot copies of a held Lite db, the trace database."""
