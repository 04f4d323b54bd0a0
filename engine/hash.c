/* hash.c -- being written */
