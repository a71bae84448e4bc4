/*
 * qdisc_fifo.c - first come, first served.
 */
#include "policy/qdisc.h"

static int fifo_init(struct qdisc *q)
{
	list_init(&q->fifo);
	q->len = 0;
	return 0;
}

static void fifo_fini(struct qdisc *q)
{
	(void)q;
}

static int fifo_push(struct qdisc *q, struct qd_item *it)
{
	list_push_back(&q->fifo, &it->link);
	q->len++;
	return 0;
}

static struct qd_item *item_of(struct list_node *n)
{
	return n ? container_of(n, struct qd_item, link) : NULL;
}

static struct qd_item *fifo_peek(struct qdisc *q)
{
	return item_of(list_first(&q->fifo));
}

static struct qd_item *fifo_next(struct qdisc *q, struct qd_item *it)
{
	return item_of(list_next(&q->fifo, &it->link));
}

static void fifo_remove(struct qdisc *q, struct qd_item *it)
{
	list_del(&q->fifo, &it->link);
	q->len--;
}

static struct qd_item *fifo_pop(struct qdisc *q)
{
	struct qd_item *it = fifo_peek(q);
	if (it)
		fifo_remove(q, it);
	return it;
}

const struct qdisc_ops qdisc_fifo = {
    .name = "fifo",
    .init = fifo_init,
    .fini = fifo_fini,
    .push = fifo_push,
    .peek = fifo_peek,
    .pop = fifo_pop,
    .next = fifo_next,
    .remove = fifo_remove,
    .by_age = 1,
};
