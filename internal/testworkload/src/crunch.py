# crunch.py spends its time in crunch_leaf, on the line `s += i * i`,
# called through a known chain: <module> -> crunch_outer -> crunch_middle
# -> crunch_leaf.


def crunch_leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def crunch_middle(n):
    return crunch_leaf(n)


def crunch_outer(n):
    return crunch_middle(n)


while True:
    crunch_outer(100000)
