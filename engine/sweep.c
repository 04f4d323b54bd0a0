/* sweep.c -- being written */
