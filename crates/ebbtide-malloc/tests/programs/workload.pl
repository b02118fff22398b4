# A Perl workload for the malloc test (crates/ebbtide-malloc/tests/real_programs.rs): hashes,
# strings, regular expressions, sorting, nested structures. Deterministic output.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

my $all = Digest::MD5->new;
sub out { my $s = join(" ", @_); $all->add($s); print "$s\n"; }

# A hash that grows, loses half its keys, and grows again.
my %h;
$h{"key$_"} = "v" x ($_ % 64) . $_ for 1 .. 250_000;
delete $h{"key$_"} for grep { $_ % 2 } 1 .. 250_000;
$h{"again$_"} = [$_, "x" x ($_ % 33)] for 1 .. 100_000;
my $sum = 0;
$sum += length($h{$_}) for grep { /^key/ } keys %h;
out("hash", scalar(keys %h), $sum);

# Strings: concatenation, substr, repeat, sprintf, split/join, tr.
my $text = join " ", map { sprintf("w%05d-%s", $_ % 9973, "ab" x ($_ % 5)) } 1 .. 200_000;
my @parts = split / /, $text;
(my $up = uc $text) =~ tr/AB/ba/;
my $grow = "";
$grow .= chr(65 + $_ % 26) x ($_ % 7) for 1 .. 50_000;
out("str", length($text), scalar(@parts), md5_hex($up), length($grow), substr($grow, -12));

# Regular expressions: captures, global matches, substitutions with code.
my @nums = $text =~ /w(\d+)-(?:ab)+/g;
(my $swapped = substr($text, 0, 300_000)) =~ s/(\d)(\d)/$2$1/g;
my $count = () = $text =~ /\bw0{2}\d+/g;
(my $evald = substr($text, 0, 100_000)) =~ s/(\d+)/$1 * 2/ge;
out("re", scalar(@nums), md5_hex($swapped), $count, md5_hex($evald));

# Sorting: numeric, by string, Schwartzian transform.
my @sorted = sort { $a <=> $b } @nums;
my @by_len = map { $_->[1] } sort { $a->[0] <=> $b->[0] or $a->[1] cmp $b->[1] }
             map { [length($_), $_] } @parts[0 .. 49_999];
out("sort", $sorted[0], $sorted[-1], $by_len[0], $by_len[-1]);

# Nested structures built and torn down.
for my $round (1 .. 4) {
    my %tree;
    for my $i (1 .. 40_000) {
        push @{ $tree{ $i % 97 }{ $i % 13 } }, { id => $i, name => "n$i", list => [1 .. $i % 9] };
    }
    my $n = 0;
    for my $a (values %tree) { for my $b (values %$a) { $n += scalar @$b; } }
    out("tree", $round, $n);
}

# Closures and string eval.
my @subs = map { my $k = $_; sub { $k * $_[0] } } 1 .. 10_000;
my $total = 0;
$total += $_->(3) for @subs;
my $e = eval join "+", 1 .. 5000;
out("code", $total, $e);

out("digest", $all->hexdigest);
