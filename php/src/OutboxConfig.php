<?php
declare(strict_types=1);

namespace Outbox;

use FFI;

/** A configuration handle from key => value options (Outbox::config); freed by the library on destruction. */
final class OutboxConfig
{
    private FFI\CData $cfg;

    public function __construct(private Outbox $outbox, array $options)
    {
        $f = $outbox->ffi();
        $this->cfg = $f->new('outbox_config*');
        $outbox->check($f->outbox_config_new(FFI::addr($this->cfg)));
        foreach ($options as $key => $value) {
            $outbox->check($f->outbox_config_set($this->cfg, (string)$key, is_bool($value) ? ($value ? 'true' : 'false') : (string)$value));
        }
    }

    public function handle(): FFI\CData
    {
        return $this->cfg;
    }

    public function __destruct()
    {
        $this->outbox->ffi()->outbox_config_free($this->cfg);
    }
}
