#ifndef B_H
#define B_H
int b_go(void);
#endif
