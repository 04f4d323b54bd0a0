/* query.c -- being written */
