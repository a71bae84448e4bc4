#ifndef A_H
#define A_H
int a_run(void);
int b_go(void); /* b's, declared here: the cycle hides from the includes */
#endif
