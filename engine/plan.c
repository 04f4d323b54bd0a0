/* plan.c -- being written */
